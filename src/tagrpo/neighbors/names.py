"""Name lists for the rule backend's consistent renaming of people in word problems.

Names are grouped so that a rename keeps pronouns right (a name from the female list becomes
another female name, and so on). Names that are also common English words or units (Will, May,
Mark, Bill, Penny, Miles, Brown, ...) are deliberately absent: renaming them could change the
problem, so they are left alone.
"""

FEMALE = tuple("""
Abigail Ada Adriana Agnes Aisha Alexandra Alice Alicia Alison Amanda Amelia Amy Ana Andrea Angela
Anita Anna Annie Ariana Ava Barbara Beatrice Belinda Bella Bethany Betty Brenda Brianna Camila
Carla Carmen Caroline Cassandra Catherine Cecilia Charlotte Chloe Christina Cindy Claire Clara
Claudia Cynthia Daniela Deborah Denise Diana Donna Doris Dorothy Eleanor Elena Eliza Elizabeth
Ella Ellen Eloise Emily Emma Erica Esther Eva Evelyn Fiona Francesca Gabriela Gina Gloria Hannah
Harriet Helen Helena Ingrid Irene Isabel Isabella Jacqueline Janet Janice Jasmine Jennifer Jenny
Jessica Joanna Josephine Julia Juliet Karen Katherine Kayla Kelly Kimberly Laura Lauren Leah Linda
Lisa Lucia Lucy Luisa Lydia Madeline Maria Marie Marilyn Martha Megan Melissa Mia Michelle Mila
Miriam Monica Nadia Nancy Naomi Natalie Nicole Nina Nora Olivia Pamela Patricia Paula Priya
Rachel Rebecca Regina Rita Rosa Rosalind Samantha Sandra Sara Sarah Selena Sharon Sofia Sophia
Sophie Stella Stephanie Susan Tanya Teresa Tina Valentina Valerie Vanessa Vera Veronica Victoria
Wendy Yolanda Yvonne Zoe Zara
Mary Jane Sally Jill Jenna Beth Julie Carrie Ann Carly Mandy Stacy Leila Susie Kate Kendra Marcy
Katie Diane Joan Elsa Anne Tracy Kylie Jen Tiffany Brittany Carolyn Tara Haley Becky Jess Tonya
Ashley Cheryl Molly Sheila Mabel Mara Marla Maggie Layla Polly Erin Danielle Marta Phoebe Christine
Lara Gretchen Shelby Alyssa Missy Pam Lulu Lana Kelsey Tammy Luna Pauline Ruth Buffy Melanie
Shelly Maddie Marcia Lola Jackie Allison Peggy Patty Milly Liza Ellie Rosie Angie Ursula Katrina
Sabrina Cathy Lucille Nellie Kimiko Jessie
""".split())

MALE = tuple("""
Aaron Adam Adrian Ahmed Alan Albert Alberto Alejandro Alexander Alfred Andre Andrew Andy Anthony
Antonio Arjun Arthur Benjamin Bernard Bradley Brandon Brian Bruce Caleb Calvin Carlos Charles
Christopher Cody Colin Connor Craig Daniel Darius David Dennis Derek Diego Dominic Donald Douglas
Dylan Eduardo Edward Elijah Eric Ethan Eugene Felix Fernando Francisco Gabriel Garrett George
Gerald Gordon Gregory Harold Harry Henry Hugo Ian Isaac Ivan Jacob James Jason Javier Jeffrey
Jeremy Jerome Jesse Joel John Jonathan Jorge Jose Joseph Joshua Juan Julian Justin Keith Kenneth
Kevin Kyle Lawrence Leonard Liam Lorenzo Louis Lucas Luis Malik Manuel Marcus Mario Martin Matthew
Michael Miguel Mohammed Nathan Nicholas Noah Oliver Omar Oscar Pablo Patrick Paul Pedro Peter
Philip Rafael Raymond Ricardo Richard Robert Roberto Roger Ronald Russell Ryan Samuel Scott
Sebastian Sergio Simon Stephen Steve Steven Stuart Theodore Thomas Timothy Tobias Tony Trevor
Tyler Victor Vincent Walter Wesley William Xavier Zachary
Tom Bob Tim Mike Jerry Matt Jim Joe Billy Ben Jake Josh Carl Jimmy Jeff Randy Ali Rick Tommy
Bobby Greg Johnny Fred Ken Toby Danny Dave Carson Gary Barry Pete Luke Leo Dan Joey Jon Manny Phil
Bryan Sean Bert Jay Nick Jared Larry Blake Kenny Brad Ron Terry Hank Ralph Todd Jayden Lou Ted Nate
Phillip Cary Jude Stan Micah Olaf Neil Shane Zach Malcolm Dexter Rodney Grayson Travis Brendan
Trey Perry Cole Cameron Theo Devin Dante Mitch Freddy Marco Hans Cory Archie Seth Arnold Frankie
Jonah Max
""".split())

NEUTRAL = tuple("""
Alex Ariel Avery Casey Dana Devon Emerson Finley Jamie Jordan Kai Kendall Logan Morgan Parker
Peyton Quinn Reese Riley Rowan Sam Skyler Tatum Charlie Alexis Bailey Chris Kris
""".split())

SURNAMES = tuple("""
Anderson Bennett Campbell Chen Clark Collins Davis Diaz Edwards Evans Garcia Gonzalez
Harris Hernandez Jackson Jenkins Johnson Kim Lee Lewis Lopez Martinez Miller Mitchell Moore
Morales Murphy Nguyen Patel Perez Phillips Ramirez Roberts Robinson Rodriguez Sanchez
Smith Thompson Torres Turner Williams Wilson Wright Jones
""".split())

GROUPS = {"female": FEMALE, "male": MALE, "neutral": NEUTRAL, "surname": SURNAMES}
